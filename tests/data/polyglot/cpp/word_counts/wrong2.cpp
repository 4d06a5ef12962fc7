#include <map>
#include <sstream>
#include <string>

std::map<std::string, long long> word_counts(std::string text) {
    std::map<std::string, long long> counts;
    std::istringstream in(text);
    for (std::string w; in >> w;) counts[w] = 1;  // seen, not counted
    return counts;
}
