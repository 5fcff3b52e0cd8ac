package notify

import "github.com/prometheus/client_golang/prometheus"

var deliveriesDesc = prometheus.NewDesc("berth_webhook_deliveries_total",
	"Security alert webhook outcomes, by webhook id and outcome: delivered (alerts a receiver took), failed (attempts that failed, each retried until the attempts run out) or dead_lettered (alerts given up on). Cumulative since the webhook was created.",
	[]string{"webhook", "outcome"}, nil)

// Describe implements prometheus.Collector.
func (n *Notifier) Describe(ch chan<- *prometheus.Desc) { ch <- deliveriesDesc }

// Collect implements prometheus.Collector: every webhook's three counts,
// zeros included.
func (n *Notifier) Collect(ch chan<- prometheus.Metric) {
	n.mu.Lock()
	hs := make([]*hook, 0, len(n.hooks))
	for _, h := range n.hooks {
		hs = append(hs, h)
	}
	n.mu.Unlock()
	for _, h := range hs {
		for outcome, v := range map[string]int64{
			"delivered": h.delivered.Load(), "failed": h.failed.Load(), "dead_lettered": h.deadLetters.Load(),
		} {
			ch <- prometheus.MustNewConstMetric(deliveriesDesc, prometheus.CounterValue, float64(v), h.id, outcome)
		}
	}
}

var _ prometheus.Collector = (*Notifier)(nil)
