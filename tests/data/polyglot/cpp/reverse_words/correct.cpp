#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

std::string reverse_words(std::string s) {
    std::istringstream in(s);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    std::reverse(words.begin(), words.end());
    std::string out;
    for (size_t i = 0; i < words.size(); i++) out += (i ? " " : "") + words[i];
    return out;
}

int main() { return 0; }
