function word_counts(text) {
  const counts = {};
  for (const w of text.toLowerCase().split(/\s+/)) if (w) counts[w] = (counts[w] || 0) + 1;
  return counts;
}
