function sum_evens(xs) {
  let total = 0;
  for (let i = 0; i < xs.length - 1; i++) if (xs[i] % 2 === 0) total += xs[i];
  return total;
}
