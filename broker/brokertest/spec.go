package brokertest

import (
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
)

func specOf(s broker.Subscription) driver.SubscriptionSpec {
	dl := s.DeadLetterTopic
	if dl == "" {
		dl = s.Topic + ".dlq"
	}
	return driver.SubscriptionSpec{Topic: s.Topic, Group: s.Group, DeadLetterTopic: dl, Expiry: s.Expiry}
}
