#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

int main() {
    int n;
    std::cin >> n;
    std::vector<std::string> words(n);
    for (auto& w : words) std::cin >> w;
    std::sort(words.rbegin(), words.rend());
    for (const auto& w : words) std::cout << w << "\n";
}
