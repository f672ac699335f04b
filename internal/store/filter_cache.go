package store

import (
	"sync"

	"github.com/hookd/hookd/internal/filter"
)

// maxCachedFilters bounds filterCache; a full cache starts afresh.
const maxCachedFilters = 10000

// filterCache keeps endpoint filters parsed, keyed by their stored JSON,
// so the fan-out parses a filter once, not once per message.
type filterCache struct {
	mu sync.Mutex
	m  map[string]*filter.Filter
}

// get returns the parsed filter of src.
func (c *filterCache) get(src string) (*filter.Filter, error) {
	c.mu.Lock()
	f, ok := c.m[src]
	c.mu.Unlock()
	if ok {
		return f, nil
	}
	f, err := filter.Parse([]byte(src))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedFilters {
		c.m = make(map[string]*filter.Filter)
	}
	c.m[src] = f
	c.mu.Unlock()
	return f, nil
}
