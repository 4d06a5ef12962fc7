class Solution {
    static String reverse_words(String s) {
        return new StringBuilder(s).reverse().toString();
    }
}
