use std::collections::HashMap;

fn word_counts(text: String) -> HashMap<String, i64> {
    let mut counts = HashMap::new();
    for w in text.split_whitespace() {
        counts.insert(w.to_string(), 1);
    }
    counts
}
