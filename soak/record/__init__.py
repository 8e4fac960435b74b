"""soak/record"""
