"""soak/faults"""
