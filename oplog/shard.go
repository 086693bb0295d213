package oplog

import "hash/fnv"

// Shard returns the shard of the agent among count shards: FNV-1a (64-bit) of the agent's key, modulo
// count. Executors, the sweep and the scheduled rows must agree on it; an executor written in another
// language computes the same function. count < 1 has no shard: -1.
func (a AgentID) Shard(count int) int {
	if count < 1 {
		return -1
	}
	h := fnv.New64a()
	h.Write([]byte(a.Key()))
	return int(h.Sum64() % uint64(count))
}
