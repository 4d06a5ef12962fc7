package main

func sum_evens(xs []int) int {
	total := 0
	for _, x := range xs {
		if x%2 != 0 {
			total += x
		}
	}
	return total
}
