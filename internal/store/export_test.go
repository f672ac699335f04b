package store

import "time"

// Waiting returns how many messages wait for a group, for tests that need
// a group formed before it commits.
func (c *MessageCommitter) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// Stats returns how many groups were committed and how many messages they
// held.
func (c *MessageCommitter) Stats() (groups, messages int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups, c.messages
}

// SetStepTimeout changes the deadline of each trial step.
func (p *TrialPool) SetStepTimeout(d time.Duration) { p.step = d }
