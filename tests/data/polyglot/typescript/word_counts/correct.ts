function word_counts(text: string): { [key: string]: number } {
  const counts: { [key: string]: number } = {};
  for (const w of text.split(/\s+/)) if (w) counts[w] = (counts[w] || 0) + 1;
  return counts;
}
