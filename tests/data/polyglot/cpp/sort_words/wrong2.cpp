#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

int main() {
    int n;
    std::cin >> n;
    std::vector<std::string> words(n);
    for (auto& w : words) std::cin >> w;
    std::sort(words.begin(), words.end());
    for (int i = 0; i <= n; i++) std::cout << words.at(i) << "\n";  // one too far
}
