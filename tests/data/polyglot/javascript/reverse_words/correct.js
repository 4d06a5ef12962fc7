function reverse_words(s) {
  return s.split(/\s+/).filter((w) => w.length > 0).reverse().join(" ");
}

if (require.main === module) {
  console.log(reverse_words("demo run"));
}
