#include <sstream>
#include <string>

std::string reverse_words(const std::string& s) {
    std::istringstream in(s);
    std::string out, w;
    while (in >> w) out += w + " ";  // in order, with a trailing space
    return out;
}
