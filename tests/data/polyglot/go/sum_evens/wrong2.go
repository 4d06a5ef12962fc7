package main

func sum_evens(xs []int) int {
	var total int32 // 32 bits: overflows
	for _, x := range xs {
		if x%2 == 0 {
			total += int32(x)
		}
	}
	return int(total)
}
