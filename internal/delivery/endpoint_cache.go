package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/hookd/hookd/internal/destination"
	"github.com/hookd/hookd/internal/store"
)

// Limits on an endpoint's own delivery options.
const (
	// MinEndpointTimeout and MaxEndpointTimeout bound an endpoint's
	// attempt timeout.
	MinEndpointTimeout = time.Second
	MaxEndpointTimeout = 60 * time.Second
	// MaxEndpointScheduleLen is the most attempts an endpoint's retry
	// schedule may have.
	MaxEndpointScheduleLen = 20
)

// Target is what the worker needs of an endpoint, parsed once per load.
type Target struct {
	store.Endpoint
	// Secrets (HMAC) or keys (Ed25519) sign each attempt: the current one,
	// then the previous one while its overlap lasts.
	secrets        []Secret
	keys           []PrivateKey
	previousExpiry time.Time
	// hostKey is the URL's host:port (hostOf), the unit MaxPerHost bounds;
	// a destination's first host.
	hostKey string
	// destination is where a non-HTTP endpoint publishes, its credentials
	// opened (in this process's memory only); nil for http.
	destination destination.Config
}

// Publishes reports whether the endpoint's attempts are publishes to a
// destination rather than HTTP requests.
func (t *Target) Publishes() bool { return t.destination != nil }

// host is the destination the endpoint's requests go to (hostOf).
func (t *Target) host() string {
	if t.hostKey != "" {
		return t.hostKey
	}
	return hostOf(t.URL)
}

// Schedule returns the endpoint's retry schedule: its own, or def.
func (t *Target) Schedule(def Schedule) Schedule {
	if len(t.RetrySchedule) > 0 {
		return Schedule(t.RetrySchedule)
	}
	return def
}

// Ordered reports whether the endpoint's deliveries are a FIFO queue.
func (t *Target) Ordered() bool { return t.Ordering == store.OrderingFIFO }

// SigningSecrets returns the HMAC secrets valid at now (none for an
// Ed25519 endpoint).
func (t *Target) SigningSecrets(now time.Time) []Secret {
	if len(t.secrets) > 1 && !now.Before(t.previousExpiry) {
		return t.secrets[:1]
	}
	return t.secrets
}

// Signature returns the webhook-signature header of one attempt made at
// ts, signed the endpoint's way with every key valid at ts.
func (t *Target) Signature(msgID string, ts time.Time, body []byte) string {
	if t.Signing == store.SigningEd25519 {
		keys := t.keys
		if len(keys) > 1 && !ts.Before(t.previousExpiry) {
			keys = keys[:1]
		}
		return SignEd25519(msgID, ts, body, keys...)
	}
	return Sign(msgID, ts, body, t.SigningSecrets(ts)...)
}

// EndpointLoader loads endpoints by id.
type EndpointLoader interface {
	GetEndpoints(ctx context.Context, ids []string) (map[string]store.Endpoint, error)
}

var _ EndpointLoader = (*store.Store)(nil)

// EndpointCache keeps parsed endpoints in memory so a delivery needs no
// database read. Entries are dropped when a NOTIFY on store.EndpointChannel
// names them and expire after TTL as a safety net.
type EndpointCache struct {
	loader EndpointLoader
	ttl    time.Duration
	now    func() time.Time
	group  singleflight.Group

	mu      sync.RWMutex
	entries map[string]cacheEntry
	// epoch counts invalidations; a load that raced with one is not cached.
	epoch uint64
}

type cacheEntry struct {
	target   *Target // nil: the endpoint does not exist (deleted)
	loadedAt time.Time
}

// NewEndpointCache returns a cache over loader. now is the clock used for
// expiry.
func NewEndpointCache(loader EndpointLoader, ttl time.Duration, now func() time.Time) *EndpointCache {
	return &EndpointCache{loader: loader, ttl: ttl, now: now, entries: map[string]cacheEntry{}}
}

// Get returns the endpoint, loading it on a miss. A deleted endpoint gives
// store.ErrNotFound.
func (c *EndpointCache) Get(ctx context.Context, id string) (*Target, error) {
	c.mu.RLock()
	e, ok := c.entries[id]
	c.mu.RUnlock()
	if ok && c.now().Sub(e.loadedAt) < c.ttl {
		if e.target == nil {
			return nil, store.ErrNotFound
		}
		return e.target, nil
	}
	v, err, _ := c.group.Do(id, func() (any, error) {
		loadedAt := c.now()
		c.mu.RLock()
		epoch := c.epoch
		c.mu.RUnlock()
		m, err := c.loader.GetEndpoints(ctx, []string{id})
		if err != nil {
			return nil, err
		}
		var t *Target
		if ep, ok := m[id]; ok {
			t, err = newTarget(ep)
			if err != nil {
				return nil, err
			}
		}
		c.mu.Lock()
		// An invalidation that raced with this load wins: cache nothing.
		if c.epoch == epoch {
			c.entries[id] = cacheEntry{target: t, loadedAt: loadedAt}
		}
		c.mu.Unlock()
		return t, nil
	})
	if err != nil {
		return nil, fmt.Errorf("load endpoint: %w", err)
	}
	t, _ := v.(*Target)
	if t == nil {
		return nil, store.ErrNotFound
	}
	return t, nil
}

// Prefetch loads, in one statement, those of ids the cache does not hold
// fresh: a message job's endpoints before its attempts start, which would
// otherwise miss one by one. A failed load caches nothing; each Get then
// loads its own.
func (c *EndpointCache) Prefetch(ctx context.Context, ids []string) {
	var missing []string
	now := c.now()
	c.mu.RLock()
	for _, id := range ids {
		if e, ok := c.entries[id]; !ok || now.Sub(e.loadedAt) >= c.ttl {
			missing = append(missing, id)
		}
	}
	epoch := c.epoch
	c.mu.RUnlock()
	if len(missing) < 2 {
		return // Get's own load is as cheap
	}
	m, err := c.loader.GetEndpoints(ctx, missing)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch {
		return // an invalidation raced with the load
	}
	for _, id := range missing {
		ep, ok := m[id]
		if !ok {
			c.entries[id] = cacheEntry{loadedAt: now} // deleted
			continue
		}
		if t, err := newTarget(ep); err == nil {
			c.entries[id] = cacheEntry{target: t, loadedAt: now}
		}
	}
}

// EndpointLister lists live endpoints a page at a time, in id order.
type EndpointLister interface {
	ListDeliveryEndpoints(ctx context.Context, after string, limit int) ([]store.Endpoint, error)
}

var _ EndpointLister = (*store.Store)(nil)

// warmPage is the endpoints one statement of Warm loads.
const warmPage = 1000

// Warm loads every live endpoint, a page at a time, up to limit of them,
// and returns how many it cached. A dispatcher that starts would
// otherwise load them while it delivers, a message's endpoints at a time
// (about a statement per tenant, in every process of a fleet), and reach
// its full rate only once it had seen every tenant. A page that raced
// with an invalidation is not cached; its endpoints load when used.
func (c *EndpointCache) Warm(ctx context.Context, lister EndpointLister, limit int) (int, error) {
	cached, after := 0, ""
	for cached < limit {
		c.mu.RLock()
		epoch := c.epoch
		c.mu.RUnlock()
		now := c.now()
		page, err := lister.ListDeliveryEndpoints(ctx, after, min(warmPage, limit-cached))
		if err != nil {
			return cached, fmt.Errorf("warm endpoint cache: %w", err)
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].ID
		targets := make(map[string]*Target, len(page))
		for _, ep := range page {
			if t, err := newTarget(ep); err == nil {
				targets[ep.ID] = t
			}
		}
		c.mu.Lock()
		if c.epoch == epoch {
			for id, t := range targets {
				c.entries[id] = cacheEntry{target: t, loadedAt: now}
			}
			cached += len(targets)
		}
		c.mu.Unlock()
		if len(page) < warmPage {
			break
		}
	}
	return cached, nil
}

// Cached returns the endpoint if the cache holds it, fresh, and nil
// otherwise (or without a cache); it never loads.
func (c *EndpointCache) Cached(id string) *Target {
	if c == nil {
		return nil
	}
	c.mu.RLock()
	e, ok := c.entries[id]
	c.mu.RUnlock()
	if !ok || c.now().Sub(e.loadedAt) >= c.ttl {
		return nil
	}
	return e.target
}

// Invalidate drops one endpoint.
func (c *EndpointCache) Invalidate(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.epoch++
	c.mu.Unlock()
	c.group.Forget(id)
}

// InvalidateAll drops every entry (after a listener reconnect).
func (c *EndpointCache) InvalidateAll() {
	c.mu.Lock()
	c.entries = map[string]cacheEntry{}
	c.epoch++
	c.mu.Unlock()
}

func newTarget(ep store.Endpoint) (*Target, error) {
	t, err := newSigningTarget(ep)
	if err != nil {
		return nil, err
	}
	if ep.Type == "" || ep.Type == store.TypeHTTP {
		return t, nil
	}
	if t.destination, err = targetDestination(ep); err != nil {
		return nil, err
	}
	if hosts := t.destination.Targets(); len(hosts) > 0 {
		t.hostKey = ep.Type + ":" + hosts[0].Host
	}
	return t, nil
}

// targetDestination is the destination of a non-HTTP endpoint: its stored
// config made whole with its credentials, parsed as the API did.
func targetDestination(ep store.Endpoint) (destination.Config, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(ep.Destination, &members); err != nil {
		return nil, fmt.Errorf("endpoint %s destination: %w", ep.ID, err)
	}
	for name, v := range ep.DestinationCredentials {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s destination: %w", ep.ID, err)
		}
		members[name] = b
	}
	raw, err := json.Marshal(members)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s destination: %w", ep.ID, err)
	}
	c, err := destination.Parse(destination.Type(ep.Type), raw)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s destination: %w", ep.ID, err)
	}
	return c, nil
}

func newSigningTarget(ep store.Endpoint) (*Target, error) {
	if ep.Signing == store.SigningEd25519 {
		return newEd25519Target(ep)
	}
	cur, err := ParseSecret(ep.Secret)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s secret: %w", ep.ID, err)
	}
	t := &Target{Endpoint: ep, secrets: []Secret{cur}, hostKey: hostOf(ep.URL)}
	if ep.PreviousSecret != "" && ep.PreviousSecretExpiresAt != nil {
		prev, err := ParseSecret(ep.PreviousSecret)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s previous secret: %w", ep.ID, err)
		}
		t.secrets = append(t.secrets, prev)
		t.previousExpiry = *ep.PreviousSecretExpiresAt
	}
	return t, nil
}

func newEd25519Target(ep store.Endpoint) (*Target, error) {
	cur, err := ParsePrivateKey(ep.Secret)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s key: %w", ep.ID, err)
	}
	t := &Target{Endpoint: ep, keys: []PrivateKey{cur}, hostKey: hostOf(ep.URL)}
	if ep.PreviousSecret != "" && ep.PreviousSecretExpiresAt != nil {
		prev, err := ParsePrivateKey(ep.PreviousSecret)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s previous key: %w", ep.ID, err)
		}
		t.keys = append(t.keys, prev)
		t.previousExpiry = *ep.PreviousSecretExpiresAt
	}
	return t, nil
}

// errEndpointGone marks deliveries whose endpoint was deleted.
var errEndpointGone = errors.New(store.LastErrorEndpointDeleted)
