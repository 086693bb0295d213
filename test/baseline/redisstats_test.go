package baseline

import (
	"testing"
	"time"
)

// TestParseRedisInfo: the commands of INFO commandstats (INFO's own left out, script calls counted
// apart) and the CPU of INFO cpu, user and system, from one server's reply.
func TestParseRedisInfo(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250001\r\nused_cpu_sys_children:9.000000\r\n" +
		"used_cpu_user_main_thread:7.000000\r\n\r\n# Commandstats\r\n" +
		"cmdstat_zrange:calls=26384,usec=12975,usec_per_call=0.49,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=10,usec=34986,usec_per_call=3498.60,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=5,usec=1,usec_per_call=0.2,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=99,usec=5,usec_per_call=0.05,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=74,usec_per_call=74.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_bad:calls=x\r\n"
	got := parseRedisInfo(info)
	want := RedisStats{Calls: 26384 + 10 + 5 + 1, Scripts: 15, CPU: 1750001 * time.Microsecond}
	if got != want {
		t.Fatalf("parseRedisInfo = %+v, want %+v", got, want)
	}
}
