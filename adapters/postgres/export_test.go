package postgres

// EventsWaiting returns how many CreateEvent calls wait for their event to
// be taken into a group commit, so tests can line callers up.
func EventsWaiting(s *Store) int {
	return s.events.Waiting()
}
