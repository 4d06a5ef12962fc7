fn reverse_words(s: String) -> String {
    s.split(' ').rev().collect::<Vec<_>>().join(" ")
}
