import java.util.*;

class Solution {
    static String reverse_words(String s) {
        List<String> words = Arrays.asList(s.split(" "));
        Collections.reverse(words);
        return String.join(" ", words);
    }
}
