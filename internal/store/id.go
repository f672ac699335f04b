package store

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// idState makes ids minted in the same millisecond by this process sort in
// minting order: the random part of the previous id is incremented.
var idState struct {
	sync.Mutex
	ms   uint64
	rand [10]byte
}

// crockford is Crockford's base32 alphabet: sortable, no I, L, O or U.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewID returns prefix + "_" + a 26-character ULID: 48 bits of milliseconds
// since the epoch then 80 random bits, so ids sort by creation time and serve
// as pagination cursors.
func NewID(prefix string, now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	idState.Lock()
	if ms <= idState.ms {
		ms = idState.ms
		for i := len(idState.rand) - 1; i >= 0; i-- {
			idState.rand[i]++
			if idState.rand[i] != 0 {
				break
			}
		}
	} else {
		idState.ms = ms
		_, _ = rand.Read(idState.rand[:])
	}
	binary.BigEndian.PutUint64(b[:8], ms<<16)
	copy(b[6:], idState.rand[:])
	idState.Unlock()
	// Encode 128 bits as 26 base32 characters (the first carries 3 bits).
	out := make([]byte, 0, len(prefix)+1+26)
	out = append(out, prefix...)
	out = append(out, '_')
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var chars [26]byte
	for i := 25; i >= 0; i-- {
		chars[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(append(out, chars[:]...))
}
