package postgres

// EventsWaiting returns how many CreateEvent calls wait for their event to
// be taken into a group commit, so tests can line callers up.
func EventsWaiting(s *Store) int {
	return s.events.Waiting()
}

// OneEventWriter makes s write one batch of events at a time, so that tests
// can hold a batch and line callers up behind it.
func OneEventWriter(s *Store) *Store {
	s.events = s.newEventBatcher(1)
	return s
}

// EventWriters is how many batches of events are written at once.
const EventWriters = eventWriters
