"""soak/workload"""
