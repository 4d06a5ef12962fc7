fn sum_evens(xs: Vec<i64>) -> i64 {
    xs.iter().filter(|x| *x % 2 == 0).sum()
}
