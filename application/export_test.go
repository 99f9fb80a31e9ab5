package application

// Waiting is how many deliveries of subscriptionID wait in uc for a slot.
func Waiting(uc *Deliver, subscriptionID string) int {
	uc.waiters.mu.Lock()
	defer uc.waiters.mu.Unlock()
	return len(uc.waiters.queues[subscriptionID])
}
