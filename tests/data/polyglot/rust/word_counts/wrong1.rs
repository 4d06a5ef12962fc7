use std::collections::HashMap;

fn word_counts(text: String) -> HashMap<String, i64> {
    let mut counts = HashMap::new();
    for w in text.to_lowercase().split_whitespace() {
        *counts.entry(w.to_string()).or_insert(0) += 1;
    }
    counts
}
