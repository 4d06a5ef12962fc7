function reverse_words(s: string): string {
  const words: number = s.split(" ");  // a type error
  return String(words);
}
