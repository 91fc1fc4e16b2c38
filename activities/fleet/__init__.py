"""Side effects of the fleet controller: observing the queues, starting and retiring workers."""
