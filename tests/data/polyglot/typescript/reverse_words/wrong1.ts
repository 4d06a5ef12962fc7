function reverse_words(s: string): string {
  return s.split("").reverse().join("");
}
