function reverse_words(s) {
  return s.split(" ").reverse().join(" ");
}
