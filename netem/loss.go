package netem

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/mroce/mroce/clock"
)

// LossModel decides, packet by packet, whether a link loses a packet. Burst
// models keep state, so each link has its own copy and its own random
// stream.
type LossModel interface {
	// Lose reports whether the next packet, arriving at now, is lost.
	Lose(rng *rand.Rand, now clock.Time) bool
	// Rate is the long-run fraction of packets lost.
	Rate() float64
	validate() error
	clone() LossModel
}

// RandomLoss loses each packet independently with probability P, as a
// Bernoulli process.
type RandomLoss struct{ P float64 }

func (m *RandomLoss) Lose(rng *rand.Rand, _ clock.Time) bool { return m.P > 0 && rng.Float64() < m.P }
func (m *RandomLoss) Rate() float64                          { return m.P }
func (m *RandomLoss) clone() LossModel                       { c := *m; return &c }
func (m *RandomLoss) validate() error                        { return checkProb("random loss P", m.P) }

// GilbertElliott is the two-state burst loss model. It has a Good and a Bad
// state, and per packet it moves from Good to Bad with probability P and
// from Bad to Good with probability R. A packet is lost with probability
// LossGood in Good and LossBad in Bad. Linux netem's "gemodel p r 1-h 1-k"
// has LossBad = 1-h and LossGood = 1-k. With LossBad = 1 and LossGood = 0,
// the simple Gilbert model, the mean burst of consecutive losses is 1/R
// packets and the loss rate is P/(P+R). Its state moves only with packets,
// so a link that carries none stays in its burst. TimedBursts is the model
// whose bursts last a time.
type GilbertElliott struct {
	P, R, LossGood, LossBad float64
	bad                     bool
}

// BurstLoss is the simple Gilbert model that loses rate of the packets, in
// bursts of meanLen packets on average (at least 1): every packet is lost
// in the bad state, which lasts 1 / R packets, for a loss of P / (P + R).
func BurstLoss(rate, meanLen float64) *GilbertElliott {
	r := 1 / max(1, meanLen)
	return &GilbertElliott{P: rate * r / (1 - rate), R: r, LossBad: 1}
}

func (m *GilbertElliott) Lose(rng *rand.Rand, _ clock.Time) bool {
	// The state moves first, then the packet meets the new state.
	if m.bad {
		if rng.Float64() < m.R {
			m.bad = false
		}
	} else if rng.Float64() < m.P {
		m.bad = true
	}
	if m.bad {
		return rng.Float64() < m.LossBad
	}
	return m.LossGood > 0 && rng.Float64() < m.LossGood
}

func (m *GilbertElliott) Rate() float64 {
	if m.P+m.R == 0 {
		return m.LossGood
	}
	pBad := m.P / (m.P + m.R)
	return pBad*m.LossBad + (1-pBad)*m.LossGood
}

func (m *GilbertElliott) clone() LossModel { c := *m; c.bad = false; return &c }

func (m *GilbertElliott) validate() error {
	return checkProbs("Gilbert-Elliott", prob{"P", m.P}, prob{"R", m.R}, prob{"LossGood", m.LossGood}, prob{"LossBad", m.LossBad})
}

// TimedBursts is the two-state burst model in time. The link is Good, then
// Bad, then Good again, each state lasting an exponentially distributed time
// with mean GoodTime or BadTime. A packet is lost with probability LossGood
// in Good and LossBad in Bad. Its bursts end on time whether packets come or
// not, as a fading link's or a flapping port's do. With LossBad = 1 and
// LossGood = 0 it loses the fraction BadTime / (GoodTime + BadTime) of what
// a steady stream sends.
type TimedBursts struct {
	GoodTime, BadTime time.Duration
	LossGood, LossBad float64
	bad               bool
	until             clock.Time // when the current state ends
	started           bool
}

func (m *TimedBursts) Lose(rng *rand.Rand, now clock.Time) bool {
	if !m.started {
		// The link was in its stationary state all along. It is Bad with the
		// probability of being found there, and an exponential state's time
		// left is exponential with the same mean.
		m.started = true
		m.bad = rng.Float64() < m.badShare()
		m.until = now + m.draw(rng)
	}
	if now >= m.until {
		// The state flipped at until. From there to now the link moves as a
		// two-state Markov chain. Its state after a time d has a closed form
		// however many flips d holds, so a quiet link costs nothing. What is
		// left of that state is again exponential.
		m.bad = !m.bad
		stay := 0.0
		if m.bad {
			stay = 1
		}
		b := m.badShare()
		rate := 1/float64(m.GoodTime) + 1/float64(m.BadTime)
		pBad := b + (stay-b)*math.Exp(-rate*float64(now-m.until))
		m.bad = rng.Float64() < pBad
		m.until = now + m.draw(rng)
	}
	if m.bad {
		return rng.Float64() < m.LossBad
	}
	return m.LossGood > 0 && rng.Float64() < m.LossGood
}

// draw is the length of the current state.
func (m *TimedBursts) draw(rng *rand.Rand) clock.Time {
	mean := m.GoodTime
	if m.bad {
		mean = m.BadTime
	}
	return clock.Time(min(max(1, rng.ExpFloat64()*float64(mean)), maxStateTime))
}

// maxStateTime bounds a TimedBursts state's length to about 36 years, so
// that a far-off end cannot overflow the clock.
const maxStateTime = 1 << 60

func (m *TimedBursts) badShare() float64 {
	return float64(m.BadTime) / float64(m.GoodTime+m.BadTime)
}

// Rate is the loss of a steady stream of packets, with each state's loss
// weighted by its time.
func (m *TimedBursts) Rate() float64 {
	b := m.badShare()
	return b*m.LossBad + (1-b)*m.LossGood
}

func (m *TimedBursts) clone() LossModel {
	c := *m
	c.bad, c.until, c.started = false, 0, false
	return &c
}

func (m *TimedBursts) validate() error {
	if m.GoodTime <= 0 || m.BadTime <= 0 || m.GoodTime > maxStateTime || m.BadTime > maxStateTime {
		return fmt.Errorf("netem: timed bursts: GoodTime %v and BadTime %v must be positive and at most %v", m.GoodTime, m.BadTime, time.Duration(maxStateTime))
	}
	return checkProbs("timed bursts", prob{"LossGood", m.LossGood}, prob{"LossBad", m.LossBad})
}

// FourState is the 4-state Markov loss model of Linux netem, "loss state
// p13 p31 p32 p23 p14". State 1 delivers in a gap period. State 2 delivers
// inside a burst period, and state 3 loses inside one. State 4 is an
// isolated loss. From 1 the chain moves to 4 with P14 and to 3 with P13,
// both losing, or stays. From 2 it moves to 3 with P23, losing, or stays.
// From 3 it moves to 2 with P32 or to 1 with P31, both delivering, or stays
// and loses. From 4 it moves back to 1 and delivers.
type FourState struct {
	P13, P31, P32, P23, P14 float64
	state                   uint8
}

func (m *FourState) Lose(rng *rand.Rand, _ clock.Time) bool {
	if m.state == 0 {
		m.state = 1
	}
	u := rng.Float64()
	switch m.state {
	case 1:
		switch {
		case u < m.P14:
			m.state = 4
			return true
		case u < m.P14+m.P13:
			m.state = 3
			return true
		}
		return false
	case 2:
		if u < m.P23 {
			m.state = 3
			return true
		}
		return false
	case 3:
		switch {
		case u < m.P32:
			m.state = 2
			return false
		case u < m.P32+m.P31:
			m.state = 1
			return false
		}
		return true
	default: // state 4
		m.state = 1
		return false
	}
}

// Rate is the stationary loss probability of the chain, in states 3 and 4.
func (m *FourState) Rate() float64 {
	// The stationary equations with pi1 = 1, unnormalized, are
	//   pi4 = P14 pi1
	//   pi3 (P31+P32) = P13 pi1 + P23 pi2,  pi2 P23 = P32 pi3
	// so pi3 P31 = P13 pi1, pi3 = P13/P31, pi2 = P32 pi3 / P23.
	if m.P13 == 0 {
		return m.P14 / (1 + m.P14)
	}
	if m.P31 == 0 {
		return 1 // state 3 is absorbing once reached
	}
	pi1, pi4 := 1.0, m.P14
	pi3 := m.P13 / m.P31
	pi2 := 0.0
	if m.P32 > 0 {
		if m.P23 == 0 {
			return 0 // state 2 absorbs and never loses
		}
		pi2 = m.P32 * pi3 / m.P23
	}
	return (pi3 + pi4) / (pi1 + pi2 + pi3 + pi4)
}

func (m *FourState) clone() LossModel { c := *m; c.state = 1; return &c }

func (m *FourState) validate() error {
	if err := checkProbs("4-state", prob{"P13", m.P13}, prob{"P31", m.P31}, prob{"P32", m.P32}, prob{"P23", m.P23}, prob{"P14", m.P14}); err != nil {
		return err
	}
	if m.P13+m.P14 > 1 || m.P31+m.P32 > 1 {
		return fmt.Errorf("netem: 4-state loss: P13+P14 and P31+P32 must each be at most 1")
	}
	return nil
}

type prob struct {
	name string
	v    float64
}

// checkProbs checks the named probabilities of one model.
func checkProbs(model string, ps ...prob) error {
	for _, p := range ps {
		if err := checkProb(model+" "+p.name, p.v); err != nil {
			return err
		}
	}
	return nil
}

func checkProb(name string, p float64) error {
	if !(p >= 0 && p <= 1) { // also catches NaN
		return fmt.Errorf("netem: %s = %v: a probability is in [0, 1]", name, p)
	}
	return nil
}
