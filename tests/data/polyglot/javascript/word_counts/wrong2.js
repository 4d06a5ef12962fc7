function word_counts(text) {
  const counts = new Map();
  for (const w of text.split(" ")) counts.set(w, (counts.get(w) || 0) + 1);
  return counts;
}
