package view

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"offsetgate/ledger"
)

// pageSize is how many entries a page of a partition's index holds: small enough that the page
// each partition is filling (always in memory) costs little with a thousand partitions, large
// enough that reading one back is one ledger fetch for many batches.
const pageSize = 256

// page is pageSize consecutive entries of a partition's index (fewer for the last one), and
// where to read them back in the ledger. Its fields are guarded by its partition's lock.
type page struct {
	d, end int64 // destination offsets [d, end)
	src    int64 // the first entry's source offset
	// Ledger offsets of the first entry and after the last; from is -1 when the page cannot be
	// read back (entries whose ledger offsets are not known): it is never evicted.
	from, to int64
	n        int
	// Ledger offsets of compaction rewrites of its batches, in order: applied again when the
	// page is read back.
	rewrites []int64
	entries  []Entry // nil while evicted
	cost     int64   // bytes accounted in the cache while resident
	// touched is the cache's tick when the page was last moved to the front: a page is moved
	// once per tick, not on every lookup of one of its batches.
	touched atomic.Int64
}

// pageRef is what reading a page back needs, copied under its partition's lock.
type pageRef struct {
	d, end, from, to int64
	n                int
	rewrites         []int64
}

func (pg *page) ref() pageRef {
	return pageRef{d: pg.d, end: pg.end, from: pg.from, to: pg.to, n: pg.n, rewrites: pg.rewrites}
}

func (pg *page) bySrc(src int64) *Entry {
	es := pg.entries
	i := sort.Search(len(es), func(i int) bool { return es[i].Src >= src })
	if i < len(es) && es[i].Src == src {
		return &es[i]
	}
	return nil
}

var entrySize = int64(unsafe.Sizeof(Entry{}))

func costOf(es []Entry) int64 {
	c := int64(cap(es)) * entrySize
	for i := range es {
		c += int64(cap(es[i].Raw))
	}
	return c
}

// minPages is the fewest full pages the cache keeps whatever its budget: a reader's page and
// the one after it must stay long enough to be served from.
const minPages = 4

// pager keeps the full pages of every partition of a view within a memory budget, the least
// recently used evicted first, and reads evicted pages back from the ledger.
type pager struct {
	// read reads a page back: its partition, and a copy of the page taken under the
	// partition's lock.
	read func(ctx context.Context, p *Partition, pg pageRef) ([]Entry, error)

	mu     sync.Mutex
	lru    *simplelru.LRU[*page, *Partition]
	used   int64
	budget int64

	loads, evictions atomic.Int64
	// tick advances whenever a page is admitted (the only time anything can be evicted), so
	// the order of pages used since then is what matters.
	tick atomic.Int64
}

func newPager(budget int64, read func(ctx context.Context, p *Partition, pg pageRef) ([]Entry, error)) *pager {
	l, _ := simplelru.NewLRU[*page, *Partition](math.MaxInt32, nil)
	return &pager{read: read, lru: l, budget: budget}
}

// admit puts a full page in the cache and evicts the least recently used pages beyond the
// budget. Called without any partition's lock held (evicting takes the victims' locks).
func (c *pager) admit(p *Partition, pg *page) {
	if c == nil || c.budget < 0 {
		return
	}
	p.mu.RLock()
	ok := pg.from >= 0 && pg.entries != nil
	cost := costOf(pg.entries)
	p.mu.RUnlock()
	if !ok {
		return
	}
	type victim struct {
		pg *page
		p  *Partition
	}
	var victims []victim
	c.mu.Lock()
	if old, ok := c.lru.Peek(pg); ok && old == p {
		c.used -= pg.cost
	}
	pg.cost = cost
	c.tick.Add(1)
	c.lru.Add(pg, p)
	c.used += cost
	for c.used > c.budget && c.lru.Len() > minPages {
		k, v, _ := c.lru.RemoveOldest()
		c.used -= k.cost
		victims = append(victims, victim{k, v})
	}
	c.mu.Unlock()
	for _, v := range victims {
		v.p.mu.Lock()
		if v.pg.from >= 0 {
			v.pg.entries = nil
		}
		v.p.mu.Unlock()
		c.evictions.Add(1)
	}
}

// readAhead is the most consecutive pages out of memory LoadAt reads back in one ledger read:
// a consumer replaying an old history reads forward, and one read costs a round trip.
const readAhead = 8

// ahead is how many pages LoadAt reads at once: readAhead, or fewer when the budget holds few
// pages (a read must not evict what it read for).
func (c *pager) ahead() int {
	if c == nil || c.budget < 0 {
		return readAhead
	}
	return int(max(1, min(readAhead, c.budget/(pageSize*entrySize)/4)))
}

// touch marks a page used (callers hold its partition's lock). Lookups of many batches of a
// page (a Fetch answer) take the cache's lock once, not once per batch.
func (c *pager) touch(pg *page) {
	if c == nil {
		return
	}
	t := c.tick.Load()
	if pg.touched.Load() == t {
		return
	}
	pg.touched.Store(t)
	c.mu.Lock()
	c.lru.Get(pg)
	c.mu.Unlock()
}

// forget drops trimmed pages from the cache.
func (c *pager) forget(pgs []*page) {
	if c == nil || len(pgs) == 0 {
		return
	}
	c.mu.Lock()
	for _, pg := range pgs {
		if c.lru.Remove(pg) {
			c.used -= pg.cost
		}
	}
	c.mu.Unlock()
}

// Stats is what a view's page cache holds and did.
type Stats struct {
	Pages     int   // full pages in memory
	Bytes     int64 // their estimated size
	Budget    int64 // the budget (negative: unbounded)
	Loads     int64 // pages read back from the ledger
	Evictions int64 // pages dropped from memory
}

func (c *pager) stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Pages: c.lru.Len(), Bytes: c.used, Budget: c.budget, Loads: c.loads.Load(), Evictions: c.evictions.Load()}
}

// scanner reads a partition's ledger entries at ledger offsets [from, to), in order.
type scanner func(ctx context.Context, from, to int64, fn func(off int64, e ledger.Entry) error) error

// readPage reads a page's entries back from the ledger: its data entries in [from, to), as the
// index took them (entries already covered skipped), then its rewrites. What the ledger holds
// must be exactly the page, else the read fails: the index never serves a guess.
func readPage(ctx context.Context, scan scanner, pg pageRef) ([]Entry, error) {
	n := pg.n
	es := make([]Entry, 0, n)
	next := pg.d
	err := scan(ctx, pg.from, pg.to, func(off int64, le ledger.Entry) error {
		if !le.Data() || le.D < next {
			return nil
		}
		if le.D > next || len(es) == n {
			return fmt.Errorf("ledger entry at ledger offset %d starts at destination offset %d, the page expects %d", off, le.D, next)
		}
		es = append(es, entryOf(le))
		next = es[len(es)-1].end()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("source view: reading back the page at destination offset %d: %w", pg.d, err)
	}
	if len(es) != n || next != pg.end {
		return nil, fmt.Errorf("source view: the ledger's entries [%d, %d) hold %d entries up to destination offset %d, the page %d up to %d",
			pg.from, pg.to, len(es), next, n, pg.end)
	}
	for _, off := range pg.rewrites {
		err := scan(ctx, off, off+1, func(_ int64, le ledger.Entry) error {
			if le.Kind != ledger.KindRewrite {
				return fmt.Errorf("ledger offset %d holds a %s entry, not the rewrite the index noted", off, le.Kind)
			}
			i := sort.Search(len(es), func(i int) bool { return es[i].Src >= le.Src })
			if i < len(es) && es[i].Src == le.Src && !es[i].Filler {
				es[i].rewrite(le)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("source view: reading back a rewrite of the page at destination offset %d: %w", pg.d, err)
		}
	}
	return es, nil
}
