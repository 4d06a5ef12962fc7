#include <cctype>
#include <map>
#include <sstream>
#include <string>

std::map<std::string, long long> word_counts(std::string text) {
    for (char& c : text) c = std::tolower(static_cast<unsigned char>(c));
    std::map<std::string, long long> counts;
    std::istringstream in(text);
    for (std::string w; in >> w;) counts[w]++;
    return counts;
}
