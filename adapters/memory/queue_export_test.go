package memory

import "slices"

// DropEntryForTest deletes the data of entry id from stream while leaving it
// pending, as trimming does, for the queue contract suite.
func (q *Queue) DropEntryForTest(stream, id string) error {
	parsed, err := parseQueueEntryID(id)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if s, ok := q.streams[stream]; ok {
		s.entries = slices.DeleteFunc(s.entries, func(e queueEntry) bool { return e.id == parsed })
	}
	return nil
}
