package netem

import "time"

// PlaneStats sums the counters of every link of a plane.
type PlaneStats struct {
	Packets, Bytes uint64 // link traversals and their bytes
	Drops          [numDropCauses]uint64
	CEMarks        uint64
	PauseTime      time.Duration
	// QueueHighWater is the largest high-water mark of any one queue.
	QueueHighWater int
}

// PlaneStats returns the sums for plane p.
func (f *Fabric) PlaneStats(p int) PlaneStats {
	var s PlaneStats
	for _, l := range f.links {
		if l.plane != p {
			continue
		}
		ls := l.Stats()
		s.Packets += ls.Packets
		s.Bytes += ls.Bytes
		for c, n := range ls.Drops {
			s.Drops[c] += n
		}
		s.CEMarks += ls.CEMarks
		s.PauseTime += ls.PauseTime
		s.QueueHighWater = max(s.QueueHighWater, ls.QueueHighWater)
	}
	return s
}
