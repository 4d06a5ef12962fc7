package main

import "strings"

func word_counts(text string) map[string]int {
	counts := map[string]int{}
	for _, w := range strings.Fields(strings.ToLower(text)) {
		counts[w]++
	}
	return counts
}
