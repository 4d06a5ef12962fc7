def sum_evens(xs):
    # sums the odd ones
    return sum(x for x in xs if x % 2 == 1)
