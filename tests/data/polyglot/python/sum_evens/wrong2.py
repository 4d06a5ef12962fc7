def sum_evens(xs):
    total = 0
    for i in range(1, len(xs)):  # skips the first
        if xs[i] % 2 == 0:
            total += xs[i]
    return total
