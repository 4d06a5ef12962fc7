import java.util.*;

public class Solution {
    public String reverse_words(String s) {
        List<String> words = new ArrayList<>();
        for (String w : s.trim().split("\\s+")) if (!w.isEmpty()) words.add(w);
        Collections.reverse(words);
        return String.join(" ", words);
    }

    public static void main(String[] args) {
        System.out.println(new Solution().reverse_words("demo run"));
    }
}
