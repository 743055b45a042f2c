package simreplica

import "strconv"

// cacheConfigFields are vLLM's CacheConfig fields in declaration order, each
// with the value a default engine reports; metrics_info() turns every field
// into a label of vllm:cache_config_info, str() of its value, and the
// logger adds the engine. The blocks, block size and engine are the
// simulated engine's own.
var cacheConfigFields = [][2]string{
	{"block_size", ""}, {"user_specified_block_size", "False"}, {"user_specified_mamba_block_size", "False"},
	{"kv_cache_layout", "LBNHC"}, {"prefix_match_unit", ""}, {"gpu_memory_utilization", "0.92"},
	{"cache_dtype", "auto"}, {"is_attention_free", "False"}, {"num_gpu_blocks_override", "None"},
	{"sliding_window", "None"}, {"enable_prefix_caching", "True"}, {"prefix_caching_hash_algo", "sha256"},
	{"attn_group_size", "None"}, {"prefix_cache_retention_interval", "0"}, {"kv_cache_dtype_skip_layers", "[]"},
	{"mamba_page_size_padded", "None"}, {"skip_page_size_padded", "None"}, {"mamba_block_size", "None"},
	{"mamba_cache_dtype", "auto"}, {"mamba_ssm_cache_dtype", "auto"}, {"mamba_cache_mode", "none"},
	{"enable_mamba_fine_grained_prefix_cache", "False"}, {"replayssm_buffer_len", "16"}, {"use_replayssm", "False"},
	{"use_kda_recoverssm", "False"}, {"num_gpu_blocks", ""}, {"num_cpu_blocks", "None"},
	{"effective_attention_block_size", ""}, {"kv_cache_size_tokens", ""}, {"kv_cache_max_concurrency", "None"},
	{"kv_sharing_fast_prefill", "False"}, {"kv_cache_memory_bytes", "None"}, {"kv_offloading_size", "None"},
	{"kv_offloading_backend", "native"}, {"_block_size_resolved", "True"}, {"engine", ""},
}

// cacheConfigLabels returns the label names of vllm:cache_config_info.
func cacheConfigLabels() []string {
	out := make([]string, len(cacheConfigFields))
	for i, f := range cacheConfigFields {
		out[i] = f[0]
	}
	return out
}

// cacheConfigValues returns the label values of engine e's
// vllm:cache_config_info series.
func cacheConfigValues(blockSize, blocks, e int) []string {
	out := make([]string, len(cacheConfigFields))
	for i, f := range cacheConfigFields {
		switch f[0] {
		case "block_size", "prefix_match_unit", "effective_attention_block_size":
			out[i] = strconv.Itoa(blockSize)
		case "num_gpu_blocks":
			out[i] = strconv.Itoa(blocks)
		case "kv_cache_size_tokens":
			out[i] = strconv.Itoa(blocks * blockSize)
		case "engine":
			out[i] = engineLabel(e)
		default:
			out[i] = f[1]
		}
	}
	return out
}
