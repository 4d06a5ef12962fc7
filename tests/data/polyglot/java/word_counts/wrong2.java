import java.util.*;

class Solution {
    static Map<String, Long> word_counts(String text) {
        Map<String, Long> counts = new HashMap<>();
        for (String w : text.split(" ")) counts.merge(w, 1L, Long::sum);
        return counts;
    }
}
