package application

// Waiting is how many deliveries of subscriptionID wait in uc for a slot.
func Waiting(uc *Deliver, subscriptionID string) int {
	uc.waiters.mu.Lock()
	defer uc.waiters.mu.Unlock()
	return len(uc.waiters.queues[subscriptionID])
}

// RateWaiting is how many deliveries of subscriptionID wait in uc for
// their rate limit.
func RateWaiting(uc *Deliver, subscriptionID string) int {
	uc.throttled.mu.Lock()
	defer uc.throttled.mu.Unlock()
	if line := uc.throttled.subs[subscriptionID]; line != nil {
		return line.waiting
	}
	return 0
}
