package application

// Requeues is how many postponed deliveries uc will append again when due.
func Requeues(uc *Deliver) int64 { return uc.requeues.Load() }

// SharesHeld is how many requests of subscriptionID count in its share of
// uc's Requests.
func SharesHeld(uc *Deliver, subscriptionID string) int {
	uc.shares.mu.Lock()
	defer uc.shares.mu.Unlock()
	if sh := uc.shares.subs[subscriptionID]; sh != nil {
		return sh.held
	}
	return 0
}
