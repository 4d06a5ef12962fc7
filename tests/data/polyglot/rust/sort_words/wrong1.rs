use std::io::Read;

fn main() {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).unwrap();
    let mut it = s.split_whitespace();
    let n: usize = it.next().unwrap().parse().unwrap();
    let mut words: Vec<&str> = it.take(n).collect();
    words.sort_by_key(|w| w.to_lowercase());
    for w in words {
        println!("{}", w);
    }
}
