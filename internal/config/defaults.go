package config

// Default fills every setting of c that is unset (its zero value) with its default. It
// leaves set values alone, so it can run again after flags override some of them.
func Default(c *Configuration) {
	m := &c.Manager
	if m.Metrics.BindAddress == "" {
		m.Metrics.BindAddress = DefaultMetricsBindAddress
	}
	if m.Metrics.Secure == nil {
		secure := true
		m.Metrics.Secure = &secure
	}
	if m.HealthProbeBindAddress == "" {
		m.HealthProbeBindAddress = DefaultHealthProbeBindAddress
	}
	le := &m.LeaderElection
	if le.ID == "" {
		le.ID = DefaultLeaderElectionID
	}
	if le.LeaseDuration == 0 {
		le.LeaseDuration = DefaultLeaseDuration
	}
	if le.RenewDeadline == 0 {
		le.RenewDeadline = DefaultRenewDeadline
	}
	if le.RetryPeriod == 0 {
		le.RetryPeriod = DefaultRetryPeriod
	}
	if m.CacheSyncPeriod == 0 {
		m.CacheSyncPeriod = DefaultCacheSyncPeriod
	}
	if m.Concurrency.Default == 0 {
		m.Concurrency.Default = DefaultConcurrency
	}

	if c.Channels.Source == "" {
		c.Channels.Source = ChannelSourceBuiltin
		if c.Channels.Directory != "" {
			c.Channels.Source = ChannelSourceDirectory
		}
	}

	if c.Runtime.DefaultChannel == "" {
		c.Runtime.DefaultChannel = DefaultChannel
	}
	if c.Runtime.LogLevel == "" {
		c.Runtime.LogLevel = LogLevelInfo
	}
}
