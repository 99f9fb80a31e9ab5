package redis

import (
	"hash/fnv"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// partitionOf is the partition of an entry key: FNV-1a of the key modulo
// the number of partitions, stable across processes and releases, so the
// entries of one key always go to one stream.
func (q *Queue) partitionOf(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(q.partitions))
}

// partitionKey is the Redis key of partition n of stream. The braces make
// "<queue prefix>:<stream>:<n>" the hash tag, so each partition has a
// Cluster slot of its own and the partitions spread over the shards.
func (q *Queue) partitionKey(stream string, n int) string {
	return q.prefix + "{" + q.name + ":" + stream + ":" + strconv.Itoa(n) + "}"
}

// partitionKeys are the keys of every partition of stream, in order.
func (q *Queue) partitionKeys(stream string) []string {
	keys := make([]string, q.partitions)
	for n := range keys {
		keys[n] = q.partitionKey(stream, n)
	}
	return keys
}

// messageID is the id Read and Reclaim hand out: the partition, a slash,
// and the entry's stream id, so Ack finds the stream.
func messageID(n int, id string) string {
	return strconv.Itoa(n) + "/" + id
}

// splitMessageID undoes messageID. ok is false for an id this queue did not
// hand out, or one of a partition it no longer has.
func (q *Queue) splitMessageID(id string) (n int, streamID string, ok bool) {
	part, streamID, found := strings.Cut(id, "/")
	if !found {
		return 0, "", false
	}
	n, err := strconv.Atoi(part)
	if err != nil || n < 0 || n >= q.partitions {
		return 0, "", false
	}
	return n, streamID, true
}

// rotation returns where the next walk over the partitions starts, so that
// successive Reads and Reclaims do not always favour partition 0.
func (q *Queue) rotation() int {
	return int(q.turn.Add(1) % uint64(q.partitions))
}

// isCluster reports a Redis Cluster client: a transaction or a multi-key
// command must then stay within one slot, that is one partition.
func isCluster(client goredis.UniversalClient) bool {
	_, ok := client.(*goredis.ClusterClient)
	return ok
}
