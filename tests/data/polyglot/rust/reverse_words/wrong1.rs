fn reverse_words(s: String) -> String {
    s.chars().rev().collect()
}
