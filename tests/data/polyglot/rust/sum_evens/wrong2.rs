fn sum_evens(xs: Vec<i64>) -> i64 {
    // panics on an empty list
    let first = xs[0];
    first * 0 + xs.iter().filter(|x| *x % 2 == 0).sum::<i64>()
}
