export function reverse_words(s: string): string {
  return s.split(/\s+/).filter((w) => w.length > 0).reverse().join(" ");
}
