function sum_evens(xs: number[]): number {
  return xs.filter((x) => x % 2 === 0).reduce((a, b) => a + b, 0);
}
