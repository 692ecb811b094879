package report

import "math"

// MeanCI returns the mean of xs and the half-width of its 95% confidence
// interval: Student's t over the samples, as the interleaved benchmarks
// report a mean of per-round ratios. One sample has no interval (0); no
// samples give 0, 0.
func MeanCI(xs []float64) (mean, half float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(len(xs)-1))
	return mean, tQuantile975(len(xs)-1) * sd / math.Sqrt(float64(len(xs)))
}

// tQuantile975 is Student's t at 0.975 for df degrees of freedom (the
// two-sided 95% interval), from the table for df up to 30, and the normal
// distribution's 1.96 beyond, where the two differ by less than 2%.
func tQuantile975(df int) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df < len(table) {
		return table[df]
	}
	return 1.96
}

// PerRound is num[i] / den[i] for each round both have, skipping rounds
// where den is not positive: the ratios whose mean MeanCI takes.
func PerRound(num, den []float64) []float64 {
	var q []float64
	for i := range min(len(num), len(den)) {
		if den[i] > 0 && num[i] > 0 {
			q = append(q, num[i]/den[i])
		}
	}
	return q
}
