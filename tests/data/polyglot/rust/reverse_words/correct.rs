fn reverse_words(s: String) -> String {
    s.split_whitespace().rev().collect::<Vec<_>>().join(" ")
}

fn main() {
    println!("{}", reverse_words(String::from("demo run")));
}
