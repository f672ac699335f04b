package replay

// TallySize is how many detection times and histogram buckets t holds.
func TallySize(t Tally) int {
	n := len(t.Detections)
	if t.folded != nil {
		n += len(t.folded.counts)
	}
	return n
}
