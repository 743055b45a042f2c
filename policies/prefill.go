package policies

// UncachedBytes is the prompt a replica still has to prefill for a request
// with keys when predicted of its blocks are believed resident there: the
// whole rendering (Keys.Bytes) less the believed prefix. Summed over a
// router's requests on a replica until their first byte it is that
// replica's Replica.PendingPrefill.
func UncachedBytes(keys Keys, predicted int) int {
	return max(keys.Bytes-ChainBytes(predicted, keys.BlockBytes), 0)
}
